"""A Parquet dataset that writes atomically and checks its columns when it loads.

Catalog entries name a schema from :mod:`resail_pipeline.schemas`; a file that lacks one of its
columns fails on load with an error naming the file and the column, before any node runs on it.
Files are written as :func:`resail_pipeline.io.write_parquet` writes every table (zstd).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from kedro.io import AbstractDataset, DatasetError

from resail_pipeline.io import write_parquet
from resail_pipeline.schemas import SCHEMAS, check_columns

logger = logging.getLogger(__name__)


def known_schema(schema: str | None, source: str) -> str | None:
    """``schema`` where it is ``None`` or names a table of :data:`~resail_pipeline.schemas.SCHEMAS`;
    else an error naming the dataset's ``source`` and the known names."""
    if schema is not None and schema not in SCHEMAS:
        raise DatasetError(f"{source}: unknown schema {schema!r}; known: {sorted(SCHEMAS)}")
    return schema


class AtomicParquetDataset(AbstractDataset[pd.DataFrame, pd.DataFrame]):
    """``pandas.DataFrame`` <-> one Parquet file (pyarrow), written through temp + rename.

    Args:
        filepath: the Parquet file.
        schema: optional name of a table in ``resail_pipeline.schemas.SCHEMAS`` whose columns
            the file must have.
    """

    def __init__(self, filepath: str, schema: str | None = None, metadata: dict | None = None):
        self._filepath = Path(filepath)
        self._schema = known_schema(schema, filepath)
        self.metadata = metadata

    def _load(self) -> pd.DataFrame:
        if not self._filepath.exists():
            raise DatasetError(f"{self._filepath}: no such Parquet file")
        frame = pq.read_table(self._filepath).to_pandas()
        if self._schema is not None:
            check_columns(frame, self._schema, source=str(self._filepath))
        return frame

    def _save(self, data: pd.DataFrame) -> None:
        if not isinstance(data, pd.DataFrame):
            raise DatasetError(f"{self._filepath}: expected a pandas DataFrame, got {type(data)}")
        if self._schema is not None:
            check_columns(data, self._schema, source=str(self._filepath))
        write_parquet(data, self._filepath)

    def _exists(self) -> bool:
        """A readable Parquet file exists here. A truncated or unreadable one (a disk filled
        mid-copy) counts as missing, said in the log, so that ``--only-missing-outputs`` runs its
        node again instead of skipping it and failing in the next node that reads it."""
        if not self._filepath.is_file():
            return False
        error = self._unreadable()
        if error is not None:
            logger.warning(
                "%s: unreadable Parquet file (%s); treated as missing, its node runs again",
                self._filepath,
                error,
            )
            return False
        return True

    def _unreadable(self) -> Exception | None:
        """Why the existing file's footer cannot be read; ``None`` where it can."""
        try:
            pq.read_metadata(self._filepath)  # the footer only
        except (OSError, pa.ArrowException) as error:
            return error
        return None

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath), "schema": self._schema}
