"""Read-only views over many Parquet files of one kind, and atomic report outputs.

:class:`ParquetCollectionDataset` loads every ``<path>/**/<file>`` as one frame, naming each
file's folders in columns, so that the report reads whatever cycles and experiments exist
(``data/07_model_output/textcraft/<experiment>/<namespace>/eval_summary.parquet``). No file gives
an empty frame with the contract's columns, not an error: a report with no sensitivity probe is
still a report. :class:`TextDataset` and :class:`FigureDataset` are kedro-datasets' own, writing the
report's Markdown, CSV and PNG files atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from kedro.io import AbstractDataset, DatasetError
from kedro.io.core import get_filepath_str
from kedro_datasets import text
from kedro_datasets.matplotlib import MatplotlibDataset
from matplotlib.figure import Figure

from resail_pipeline.datasets.parquet import known_schema
from resail_pipeline.io import atomic_path
from resail_pipeline.schemas import SCHEMAS, check_columns

#: resolution of the written figures
DPI = 150


class ParquetCollectionDataset(AbstractDataset[pd.DataFrame, pd.DataFrame]):
    """Every ``<path>/**/<file>`` concatenated, with folder names as columns (load only).

    Args:
        path: the folder searched recursively.
        file: the file name every part has, e.g. ``eval_summary.parquet`` (a bare name: the
            catalog would turn a ``filename`` key into a path).
        partition_columns: names for the folders between ``path`` and the file, outermost first;
            e.g. ``[experiment, namespace]`` for ``<path>/oel/cycle_1/<file>``. Files at
            another depth are an error naming them.
        schema: optional contract every part must satisfy.
    """

    def __init__(
        self,
        path: str,
        file: str,
        partition_columns: list[str] | None = None,
        schema: str | None = None,
        metadata: dict | None = None,
    ):
        self._path = Path(path)
        self._file = file
        self._columns = list(partition_columns or [])
        self._schema = known_schema(schema, path)
        self.metadata = metadata

    def _load(self) -> pd.DataFrame:
        parts = []
        for part in sorted(self._path.glob(f"**/{self._file}")):
            folders = part.parent.relative_to(self._path).parts
            if len(folders) != len(self._columns):
                raise DatasetError(
                    f"{part}: expected {len(self._columns)} folder level(s) "
                    f"{self._columns} below {self._path}, found {list(folders)}"
                )
            try:
                frame = pq.read_table(part).to_pandas()
            except (OSError, pa.ArrowException) as error:  # truncated, or not Parquet
                raise DatasetError(f"{part}: unreadable Parquet file ({error})") from None
            if self._schema is not None:
                check_columns(frame, self._schema, source=str(part))
            parts.append(frame.assign(**dict(zip(self._columns, folders, strict=True))))
        if not parts:
            columns = [*SCHEMAS.get(self._schema, ()), *self._columns]
            return pd.DataFrame(columns=list(dict.fromkeys(columns)))
        return pd.concat(parts, ignore_index=True)

    def _save(self, data: pd.DataFrame) -> None:
        raise DatasetError(f"{self._path}: a collection of {self._file} files is read-only")

    def _exists(self) -> bool:
        return any(self._path.glob(f"**/{self._file}"))

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path), "file": self._file, "columns": self._columns}


class TextDataset(text.TextDataset):
    """kedro-datasets' text file (Markdown, CSV), written atomically on a local disk: into a
    temporary file beside it, then renamed over it, so that a killed run leaves the old file or
    the new one, never part of one (another filesystem is written as kedro-datasets writes it)."""

    def __init__(self, filepath: str, **kwargs: Any):
        super().__init__(filepath=filepath, **kwargs)

    def save(self, data: str) -> None:
        if self._protocol != "file":
            super().save(data)
            return
        path = Path(get_filepath_str(self._get_save_path(), self._protocol))
        with atomic_path(path) as tmp:
            tmp.write_text(data)
        self._invalidate_cache()


class FigureDataset(MatplotlibDataset):
    """kedro-datasets' matplotlib figure, as a PNG of :data:`DPI` dots per inch (tight bounding
    box), written atomically on a local disk as :class:`TextDataset` is; it loads the PNG's bytes
    (kedro-datasets' writer loads nothing), which a notebook displays."""

    def __init__(self, filepath: str, **kwargs: Any):
        if Path(filepath).suffix != ".png":
            raise DatasetError(f"{filepath}: figures are written as .png")
        save_args = {"format": "png", "dpi": DPI, "bbox_inches": "tight"}
        save_args.update(kwargs.pop("save_args", None) or {})
        super().__init__(filepath=filepath, save_args=save_args, **kwargs)

    def load(self) -> bytes:
        with self._fs.open(get_filepath_str(self._get_load_path(), self._protocol), "rb") as f:
            return f.read()

    def _save_to_fs(self, full_key_path: str, plot: Figure) -> None:
        if not isinstance(plot, Figure):
            raise DatasetError(f"{full_key_path}: expected a matplotlib Figure, got {type(plot)}")
        if self._protocol != "file":
            super()._save_to_fs(full_key_path, plot)
            return
        with atomic_path(Path(full_key_path)) as tmp:
            plot.savefig(tmp, **self._save_args)
