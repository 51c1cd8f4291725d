"""A remote SQL result arrives as HTTP chunks of any size; the Arrow stream read over them is the whole result.

Before ``byte_reader``, a result over one HTTP chunk (~64 KB) failed with "Expected to be able to read N bytes
for message body": pyarrow took one chunk's short read for a truncated message.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from headwater.runtime.protocol import arrow_bytes
from headwater.service.client import byte_reader


def result(rows: int) -> pa.Table:
    rng = np.random.default_rng(rows)
    return pa.table({"k": pa.array([f"k{i % 97}" for i in range(rows)]), "x": rng.integers(0, 1 << 40, rows),
                     "px": rng.random(rows)})


def chunked(data: bytes, sizes: list[int]) -> list[bytes]:
    out, at, i = [], 0, 0
    while at < len(data):
        size = sizes[i % len(sizes)]
        out.append(data[at:at + size])
        at, i = at + size, i + 1
    return out


def read(chunks: list[bytes]) -> pa.Table:
    return pa.ipc.open_stream(pa.PythonFile(byte_reader(iter(chunks)), mode="r")).read_all()


@pytest.mark.parametrize("rows", [0, 1, 3000, 200_000])
@pytest.mark.parametrize("sizes", [[65_536], [1], [7, 0, 65_535], [65_537, 3], [1 << 20]])
def test_a_result_reads_whole_over_any_chunking(rows, sizes):
    table = result(rows)
    data = arrow_bytes(table)
    if sizes == [1] and len(data) > 100_000:
        sizes = [1, 999]  # byte-at-a-time over a large stream is slow, not different
    assert read(chunked(data, sizes)).equals(table)


def test_chunks_ending_one_byte_either_side_of_each_message():
    table = result(3000)
    data = arrow_bytes(table)
    # the stream's first message (the schema) ends where its batch's metadata begins: cut at every offset near it
    for cut in range(1, 400):
        assert read([data[:cut], data[cut:]]).equals(table), cut
    for cut in (len(data) - 1, len(data) - 8, len(data) // 2 - 1, len(data) // 2, len(data) // 2 + 1):
        assert read([data[:cut], data[cut:]]).equals(table), cut


def test_a_stream_cut_short_is_an_error_not_a_shorter_result():
    data = arrow_bytes(result(3000))
    with pytest.raises((pa.ArrowInvalid, OSError)):
        read([data[: len(data) // 2]])
