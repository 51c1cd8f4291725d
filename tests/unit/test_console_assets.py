"""The console's vendored JavaScript is the pinned release, byte for byte (see its README)."""

import hashlib
from pathlib import Path

VENDOR = Path(__file__).resolve().parents[2] / "src" / "headwater" / "service" / "console" / "static" / "vendor"
# sha256 of package/dist/dagre.min.js in the npm tarball of @dagrejs/dagre 3.1.3
DAGRE_SHA256 = "54a503e346f93ca0bb10abe7999587e037262935687aca45eb4e4b0f64bbb578"


def test_dagre_is_the_pinned_release():
    assert hashlib.sha256((VENDOR / "dagre.min.js").read_bytes()).hexdigest() == DAGRE_SHA256
    assert "3.1.3" in (VENDOR / "README.md").read_text()
