"""Read-only views over many Parquet files of one kind, and atomic report outputs.

:class:`ParquetCollectionDataset` loads every ``<path>/**/<file>`` as one frame, naming each
file's folders in columns, so that the report reads whatever cycles and experiments exist
(``data/07_model_output/textcraft/<experiment>/<namespace>/eval_summary.parquet``). No file gives
an empty frame with the contract's columns, not an error: a report with no sensitivity probe is
still a report. :class:`TextDataset` and :class:`FigureDataset` write the report's Markdown, CSV
and PNG files atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
from kedro.io import AbstractDataset, DatasetError
from matplotlib.figure import Figure

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
        if schema is not None and schema not in SCHEMAS:
            raise DatasetError(f"{path}: unknown schema {schema!r}; known: {sorted(SCHEMAS)}")
        self._path = Path(path)
        self._file = file
        self._columns = list(partition_columns or [])
        self._schema = schema
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
            frame = pq.read_table(part).to_pandas()
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


class TextDataset(AbstractDataset[str, str]):
    """A text file (Markdown, CSV), written through temp + rename."""

    def __init__(self, filepath: str, metadata: dict | None = None):
        self._filepath = Path(filepath)
        self.metadata = metadata

    def _load(self) -> str:
        return self._filepath.read_text()

    def _save(self, data: str) -> None:
        with atomic_path(self._filepath) as tmp:
            tmp.write_text(data)

    def _exists(self) -> bool:
        return self._filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath)}


class FigureDataset(AbstractDataset[Figure, bytes]):
    """A matplotlib figure saved as a PNG of :data:`DPI` dots per inch, atomically; loads the
    bytes."""

    def __init__(self, filepath: str, metadata: dict | None = None):
        self._filepath = Path(filepath)
        if self._filepath.suffix != ".png":
            raise DatasetError(f"{self._filepath}: figures are written as .png")
        self.metadata = metadata

    def _load(self) -> bytes:
        return self._filepath.read_bytes()

    def _save(self, data: Figure) -> None:
        if not isinstance(data, Figure):
            raise DatasetError(f"{self._filepath}: expected a matplotlib Figure, got {type(data)}")
        with atomic_path(self._filepath) as tmp:
            data.savefig(tmp, format="png", dpi=DPI, bbox_inches="tight")

    def _exists(self) -> bool:
        return self._filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath)}
