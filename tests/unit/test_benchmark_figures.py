"""The benchmark figures the docs quote are those of the stored results (``benchmarks/figures.py``)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# a throughput (``0.88 M input rows/s``, ``240 134 ticks/s``) or a speed ratio (``1.3–1.65×``)
FIGURE = re.compile(r"\d(?:[\d.,  ]*\d)?\s*(?:[Mk]\s*)?(?:input\s+)?(?:rows|ticks)/s|\d(?:\.\d+)?×")


@pytest.fixture(scope="module")
def figures():
    spec = importlib.util.spec_from_file_location("figures", ROOT / "benchmarks" / "figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["figures"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("figures", None)


def doc_text(doc: str) -> str:
    return (ROOT / doc).read_text(encoding="utf-8")


@pytest.mark.parametrize("doc", ["README.md", "benchmarks/README.md", "docs/architecture.md"])
def test_every_quoted_block_is_the_stored_results(figures, doc):
    text = doc_text(doc)
    found = figures.blocks(text)
    assert len(found) == text.count("<!-- figures:") == text.count("<!-- /figures -->"), f"{doc}: unpaired markers"
    for block in found:
        assert block["text"] == figures.rendered(block), (
            f"{doc}: the figures block '{block['kind']} {block['files']}' differs from the stored results; "
            "run `python benchmarks/figures.py` after storing a run")


def test_the_docs_quote_the_same_latest_runs(figures):
    readme = {(b["kind"], b["files"]) for b in figures.blocks(doc_text("README.md"))}
    assert readme == {("summary", "latest.json reactive.json engines.json")}
    bench = {(b["kind"], b["files"]) for b in figures.blocks(doc_text("benchmarks/README.md"))}
    assert {("indicators", "latest.json"), ("reactive", "reactive.json"), ("engines", "engines.json")} <= bench


@pytest.mark.parametrize("doc, section", [("README.md", ""), ("docs/architecture.md", ""),
                                          ("benchmarks/README.md", "## `bench_reactive.py`")])
def test_no_figure_outside_the_marked_blocks(figures, doc, section):
    text = figures.BLOCK.sub("", doc_text(doc))
    if section:  # from the heading to the next one of its level
        start = text.index(section)
        end = text.find("\n## ", start + 1)
        text = text[start:end if end >= 0 else None]
    assert not FIGURE.findall(text), f"{doc}: figures quoted outside a figures block"


def test_a_stale_block_is_rewritten_and_the_rewrite_is_stable(figures):
    stale = "text\n<!-- figures:reactive reactive.json -->\n1.3–1.6 M rows/s\n<!-- /figures -->\nmore\n"
    fresh = figures.rewrite(stale)
    assert fresh != stale and "1.3–1.6 M" not in fresh
    assert fresh.startswith("text\n") and fresh.endswith("<!-- /figures -->\nmore\n")
    assert figures.rewrite(fresh) == fresh


def test_an_unknown_kind_lists_the_valid_ones(figures):
    text = "<!-- figures:speed reactive.json -->\n<!-- /figures -->\n"
    with pytest.raises(ValueError, match=r"unknown kind; expected one of .*'reactive'"):
        figures.rewrite(text)
