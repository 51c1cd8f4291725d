"""Where the command line finds its master and who it is there: ``--url`` / ``HEADWATER_URL``, and a token.

A token comes from ``HEADWATER_TOKEN``, else from the token file that ``headwater login`` writes
(``HEADWATER_TOKEN_FILE``, by default ``~/.config/headwater/tokens.json``, mode 600, one token per master
URL), else from logging in with ``HEADWATER_USER`` and ``HEADWATER_PASSWORD``.

>>> import os, tempfile
>>> os.environ["HEADWATER_TOKEN_FILE"] = os.path.join(tempfile.mkdtemp(), "tokens.json")
>>> save_token("http://127.0.0.1:8765", "t0k3n")
>>> saved_token("http://127.0.0.1:8765/"), oct(os.stat(token_file()).st_mode & 0o777)
('t0k3n', '0o600')
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from headwater.dataplane.files import replacing
from headwater.errors import ConfigurationError

URL_ENV, TOKEN_ENV, TOKEN_FILE_ENV = "HEADWATER_URL", "HEADWATER_TOKEN", "HEADWATER_TOKEN_FILE"
USER_ENV, PASSWORD_ENV = "HEADWATER_USER", "HEADWATER_PASSWORD"


class NotLoggedIn(ConfigurationError):
    """No token for this master: log in first."""


def token_file() -> Path:
    given = os.environ.get(TOKEN_FILE_ENV)
    return Path(given) if given else Path.home() / ".config" / "headwater" / "tokens.json"


def _tokens() -> dict[str, str]:
    with contextlib.suppress(FileNotFoundError):
        try:
            doc = json.loads(token_file().read_text())
        except ValueError:
            raise ConfigurationError(f"the token file {token_file()} is not JSON: remove it and log in again") from None
        if isinstance(doc, dict):
            return {str(k): str(v) for k, v in doc.items()}
    return {}


def _key(url: str) -> str:
    return url.split(",")[0].strip().rstrip("/")


def saved_token(url: str) -> str | None:
    return _tokens().get(_key(url))


def save_token(url: str, token: str | None) -> None:
    """Keep ``token`` for ``url`` in the token file (None: forget it); the file is the user's only (600)."""
    tokens = _tokens()
    if token is None:
        tokens.pop(_key(url), None)
    else:
        tokens[_key(url)] = token
    path = token_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with replacing(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(tokens, f, indent=1)


def master_url(given: str | None) -> str | None:
    return given or os.environ.get(URL_ENV) or None


def credentials(url: str) -> dict[str, str]:
    """How to authenticate at ``url``: ``{"token": ...}`` or ``{"user": ..., "password": ...}``."""
    token = os.environ.get(TOKEN_ENV) or saved_token(url)
    if token:
        return {"token": token}
    user, password = os.environ.get(USER_ENV), os.environ.get(PASSWORD_ENV)
    if user and password:
        return {"user": user, "password": password}
    raise NotLoggedIn(f"not logged in to {_key(url)}: run `headwater login --url {_key(url)}` (or set {TOKEN_ENV}, "
                      f"or {USER_ENV} and {PASSWORD_ENV})")
