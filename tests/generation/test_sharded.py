"""Generators sharded over worker processes give what one generator gives."""

from __future__ import annotations

from functools import partial

import pytest

from resail_pipeline.checkpoints import read_checkpoint_info
from resail_pipeline.envs import make_env
from resail_pipeline.generation import SamplingParams, make_generator
from resail_pipeline.generation.sharded import ShardedGenerator
from resail_pipeline.pipelines.common import RunConfig
from resail_pipeline.prompts import chat_prompt
from resail_pipeline.rollout import EpisodeSpec, run_episodes

from ._compare import assert_same_generations

MESSAGES = [
    "Goal: craft wooden pickaxe.",
    "Inventory: [oak planks] (4)",
    "get 1 oak logs",
    "craft 4 oak planks using 1 oak logs",
    "Goal: craft stick.",
]


def test_two_shards_generate_what_one_generator_does(tiny_checkpoint):
    one = make_generator("transformers", tiny_checkpoint, progress=False)
    prompts = [chat_prompt(one.tokenizer, m) for m in MESSAGES]
    params = SamplingParams(temperature=1.0, max_new_tokens=6, n=2, seed=7)
    with ShardedGenerator("transformers", tiny_checkpoint, shards=2, progress=False) as two:
        assert two.policy_id == one.policy_id
        # each shard decodes a smaller batch: the same tokens, log-probs to rounding
        assert_same_generations(two.generate(prompts, params), one.generate(prompts, params))
        seeds = [11, 12, 13, 14, 15]
        assert_same_generations(
            two.generate(prompts, params, seeds), one.generate(prompts, params, seeds)
        )
        # fewer prompts than shards, and none
        assert_same_generations(
            two.generate(prompts[:1], params), one.generate(prompts[:1], params)
        )
        assert two.generate([], params) == []
        with pytest.raises(ValueError, match="one per prompt"):
            two.generate(prompts, params, seeds[:2])
        # whole episodes: a rollout's turns split differently as episodes end
        specs = [EpisodeSpec(f"e{i}", task_id=i, decoding_seed=i) for i in range(3)]
        decoding = SamplingParams(temperature=1.0, max_new_tokens=6)
        env = partial(make_env, "textcraft", max_steps=4)
        ours = run_episodes(env, specs, two, decoding, progress=False)
        theirs = run_episodes(env, specs, one, decoding, progress=False)
        assert [e.steps for e in ours] == [e.steps for e in theirs]
    two.close()  # a second close does nothing
    with pytest.raises(RuntimeError, match="closed"):
        two.generate(prompts, params)


def test_the_run_config_shards_where_asked(tiny_checkpoint):
    info = read_checkpoint_info(tiny_checkpoint)
    params = {"env": "textcraft", "method": "oel", "experiment": "x"}
    inline = RunConfig.from_params({**params, "shards": 1}).generator(info)
    assert not isinstance(inline, ShardedGenerator)
    inline.close()
    cpu_auto = RunConfig.from_params({**params, "shards": "auto"}).generator(info)
    assert not isinstance(cpu_auto, ShardedGenerator)  # no GPU here: the node's own process
    cpu_auto.close()
    with RunConfig.from_params({**params, "shards": 2}).generator(info) as sharded:
        assert isinstance(sharded, ShardedGenerator) and sharded.shards == 2
    with pytest.raises(ValueError, match=r"run\.shards: must be a positive integer"):
        RunConfig.from_params({**params, "shards": 0})


def test_the_workers_die_with_the_process_that_started_them(
    tiny_checkpoint, tmp_path, process_alive
):
    """A SIGKILL of the process holding a sharded generator (Kedro's) leaves no worker behind."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pids = tmp_path / "workers.pid"
    script = (
        "import os, time\n"
        "from resail_pipeline.generation import SamplingParams\n"
        "from resail_pipeline.generation.sharded import ShardedGenerator\n"
        f"g = ShardedGenerator('transformers', {str(tiny_checkpoint)!r}, shards=2, progress=False)\n"
        "g.generate(['a', 'b'], SamplingParams(max_new_tokens=2))\n"
        "workers = [p for w in g._workers for p in w._processes]\n"
        f"open({str(pids)!r}, 'w').write(' '.join(map(str, workers)))\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 120
        while not pids.exists() or not pids.read_text():
            assert parent.poll() is None, "the parent failed before its workers started"
            assert time.monotonic() < deadline, "the workers never started"
            time.sleep(0.2)
        workers = [int(p) for p in pids.read_text().split()]
        assert len(workers) == 2 and all(process_alive(p) for p in workers)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 20
        while any(process_alive(p) for p in workers):
            assert time.monotonic() < deadline, f"workers {workers} outlived their parent"
            time.sleep(0.1)
    finally:
        parent.kill()
