"""Docs that are generated or that map names must stay true."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.docs_gen import render, render_sql

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_functions_doc_is_up_to_date():
    assert (DOCS / "functions.md").read_text() == render(), "regenerate: python -m headwater.docs_gen > docs/functions.md"


def test_sql_doc_is_up_to_date():
    assert (DOCS / "sql.md").read_text() == render_sql(), "regenerate: python -m headwater.docs_gen sql > docs/sql.md"


def test_orca_mapping_names_every_public_dstream_method():
    import headwater as hw

    text = (DOCS / "orca-mapping.md").read_text()
    public = [m for m in dir(hw.DStream) if not m.startswith("_") and callable(getattr(hw.DStream, m))]
    public += [m for m in dir(hw.StreamGraph) if not m.startswith("_") and callable(getattr(hw.StreamGraph, m))]
    public += [m for m in dir(hw.Session) if not m.startswith("_") and callable(getattr(hw.Session, m))]
    missing = [m for m in public if m not in text and m not in {"close", "plan", "progress"}]
    assert not missing, f"docs/orca-mapping.md does not mention {missing}"


@pytest.mark.parametrize("doc", ["engines.md", "testing.md"])
def test_the_docs_examples_run_as_written(doc):
    import doctest

    failures, tried = doctest.testfile(str(DOCS / doc), module_relative=False)
    assert tried > 0 and failures == 0


def test_the_security_doc_lists_every_operation_as_declared():
    from headwater.docs_gen import render_privileges

    assert render_privileges() in (DOCS / "security.md").read_text(), \
        "regenerate the table in docs/security.md: python -m headwater.docs_gen privileges"
