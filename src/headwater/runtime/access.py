"""Users, groups and privileges: who may do what (Orca's access control, reference A.8).

A privilege is granted (``allow``) or denied (``deny``) to a user or a group at a scope: everywhere (``*``), in
a catalog (``demo``), or on one graph, table or engine (its FQN). Whether a user holds a privilege on an
object follows Orca's rules:

- ``admin`` users hold every privilege; nothing is checked for them;
- a denial that applies (the user's or any of its groups', at the object, its catalog or ``*``) wins;
- otherwise the owner of the object (its creator) holds it, and so does whoever was allowed it at the object,
  its catalog or ``*``; ``manage`` allowed at a catalog or ``*`` counts as every privilege there;
- granting or denying at a broad scope replaces the principal's narrower entries of that privilege (the broad
  grant overrides them); revoking removes the entry at exactly the scope named, so revoking a narrow entry
  does not undo a broad one.

Every privilege change and every refused call is recorded in the audit log.

>>> h = hash_password("s3cret")
>>> verify_password("s3cret", h), verify_password("guess", h)
(True, False)
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from typing import Any

from headwater.catalog import resolve
from headwater.errors import CatalogError, ConfigurationError, NameTakenError, PermissionDenied, clip
from headwater.runtime.operations import GRANTABLE, Privilege, Scope
from headwater.storage.access_store import AccessStore
from headwater.storage.metadata import MetadataStore

_N, _R, _P = 2**14, 8, 1  # scrypt cost: ~50 ms a check, 16 MiB of memory
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
MAX_PASSWORD_CHARS = 1024
_SCHEMA_SCOPES = {"stream_graph": Scope.GRAPH, "stream_table": Scope.TABLE, "stream_engine": Scope.ENGINE}


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=_N, r=_R, p=_P)
    return f"scrypt${_N}${_R}${_P}${salt.hex()}${digest.hex()}"


def verify_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        got = hashlib.scrypt(password.encode("utf-8"), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p))
    except ValueError:
        return False
    return hmac.compare_digest(got, bytes.fromhex(digest))


# an unknown user's login checks a password against this, so it costs what a known user's does
DECOY_HASH = hash_password(secrets.token_urlsafe(16))


def check_user_name(name: object, what: str = "user name") -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(f"{what} {clip(name)} is not valid: 1 to 64 letters, digits, '_', '.' or '-', "
                                 "starting with a letter")
    return name


def check_password(password: object) -> str:
    if not isinstance(password, str) or not password or len(password) > MAX_PASSWORD_CHARS:
        raise ConfigurationError(f"a password is a non-empty string of at most {MAX_PASSWORD_CHARS} characters")
    return password


def parse_object(obj: object) -> tuple[Scope, str]:
    """The scope of a grant's object: ``*``, a catalog name, or a graph, table or engine FQN (normalised).

    >>> parse_object("demo.stream_table.t")
    (<Scope.TABLE: 'table'>, 'demo.stream_table.t')
    """
    if obj == "*":
        return Scope.GLOBAL, "*"
    if not isinstance(obj, str):
        raise ConfigurationError(f"a privilege's object is '*', a catalog or a full name; got {clip(obj)}")
    if "." not in obj:
        return Scope.CATALOG, resolve(obj + ".stream_graph.x", "stream_graph", current_catalog=None).catalog
    parts = obj.split(".")
    if len(parts) != 3 or parts[1] not in _SCHEMA_SCOPES:
        raise ConfigurationError(f"a privilege's object {clip(obj)} must be '*', a catalog, or "
                                 "catalog.stream_graph|stream_table|stream_engine.name")
    return _SCHEMA_SCOPES[parts[1]], str(resolve(obj, parts[1], current_catalog=None))


def _privilege(value: object) -> Privilege:
    try:
        return Privilege(str(value)) if isinstance(value, str) else Privilege(None)  # type: ignore[arg-type]
    except ValueError:
        raise ConfigurationError(f"unknown privilege {clip(value)}; known: {', '.join(p.value for p in Privilege)}") \
            from None


def scopes_of(obj: str) -> list[str]:
    """The objects whose entries apply to ``obj``: itself, its catalog and ``*``."""
    if obj == "*":
        return ["*"]
    catalog = obj.split(".", 1)[0]
    return ["*", catalog] if catalog == obj else ["*", catalog, obj]


class AccessControl:
    """Users, groups, grants, owners and the audit log, over the metadata store."""

    def __init__(self, store: MetadataStore, *, on_user_change: Callable[[str], None] | None = None) -> None:
        self.store = store
        self.tables = AccessStore(store.engine)
        # called when a user's password changes or the user is dropped: its tokens are revoked
        self._on_user_change = on_user_change or store.delete_tokens

    # -- users ----------------------------------------------------------------------------------------
    def is_admin(self, user: str) -> bool:
        return self.store.user_is_admin(user)

    def user_exists(self, user: str) -> bool:
        return self.store.user_password_hash(user) is not None

    def create_user(self, actor: str, name: str, password: str, is_admin: bool = False) -> None:
        name = check_user_name(name)
        if self.user_exists(name):
            raise NameTakenError(f"user {name} already exists; change its password with set_password")
        if not isinstance(is_admin, bool):
            raise ConfigurationError(f"create_user({name}): is_admin is True or False, not {clip(is_admin)}")
        self.store.put_user(name, hash_password(check_password(password)), is_admin=is_admin)
        self.tables.record(actor, "create_user", name, "changed", "admin" if is_admin else "")

    def drop_user(self, actor: str, name: str) -> None:
        self._existing_user(name)
        if name == actor:
            raise ConfigurationError(f"drop_user({name}): a user cannot drop itself")
        self.store.delete_user(name)
        self.tables.forget_user(name)
        self._on_user_change(name)
        self.tables.record(actor, "drop_user", name, "changed", "")

    def set_password(self, actor: str, name: str, password: str) -> None:
        self._existing_user(name)
        self.store.put_user(name, hash_password(check_password(password)), is_admin=self.is_admin(name))
        self._on_user_change(name)
        self.tables.record(actor, "set_password", name, "changed", "")

    def _existing_user(self, name: object) -> str:
        name = check_user_name(name)
        if not self.user_exists(name):
            raise CatalogError(f"user {name} does not exist")
        return name

    # -- groups ---------------------------------------------------------------------------------------
    def create_group(self, actor: str, name: str) -> None:
        name = check_user_name(name, "group name")
        if not self.tables.add_group(name):
            raise NameTakenError(f"group {name} already exists")
        self.tables.record(actor, "create_group", name, "changed", "")

    def drop_group(self, actor: str, name: str) -> None:
        if not self.tables.drop_group(check_user_name(name, "group name")):
            raise CatalogError(f"group {name} does not exist")
        self.tables.record(actor, "drop_group", name, "changed", "")

    def add_group_member(self, actor: str, group: str, user: str) -> None:
        self._membership(actor, group, user, True)

    def remove_group_member(self, actor: str, group: str, user: str) -> None:
        self._membership(actor, group, user, False)

    def _membership(self, actor: str, group: str, user: str, member: bool) -> None:
        group = check_user_name(group, "group name")
        if not self.tables.has_group(group):
            raise CatalogError(f"group {group} does not exist")
        user = self._existing_user(user)
        self.tables.set_member(group, user, member)
        self.tables.record(actor, "add_group_member" if member else "remove_group_member", group, "changed", user)

    # -- grants ---------------------------------------------------------------------------------------
    def _principal(self, name: object) -> str:
        """``user:<name>`` or ``group:<name>``: a name is a user's, else a group's (users win a clash)."""
        name = check_user_name(name, "user or group name")
        if self.user_exists(name):
            return f"user:{name}"
        if self.tables.has_group(name):
            return f"group:{name}"
        raise CatalogError(f"{name} is neither a user nor a group")

    def _change(self, actor: str, action: str, principal: str, privilege: str, obj: str) -> tuple[str, Privilege, str]:
        who, what = self._principal(principal), _privilege(privilege)
        scope, target = parse_object(obj)
        if scope not in GRANTABLE[what]:
            allowed = ", ".join(s.value for s in GRANTABLE[what])
            raise ConfigurationError(f"{action}({principal}, {what.value}, {obj}): {what.value} applies at the "
                                     f"{allowed} scope, not to a {scope.value}")
        return who, what, target

    def grant(self, actor: str, principal: str, privilege: str, obj: str = "*") -> None:
        self._set(actor, "grant", principal, privilege, obj, "allow")

    def deny(self, actor: str, principal: str, privilege: str, obj: str = "*") -> None:
        self._set(actor, "deny", principal, privilege, obj, "deny")

    def _set(self, actor: str, action: str, principal: str, privilege: str, obj: str, effect: str) -> None:
        who, what, target = self._change(actor, action, principal, privilege, obj)
        narrower = None if target == "*" or "." in target else target + "."
        self.tables.set_grant(who, what.value, target, effect, narrower)
        self.tables.record(actor, action, target, "changed", f"{who} {what.value}")

    def revoke(self, actor: str, principal: str, privilege: str, obj: str = "*") -> None:
        who, what, target = self._change(actor, "revoke", principal, privilege, obj)
        if not self.tables.revoke(who, what.value, target):
            raise CatalogError(f"revoke: {who} has no grant or denial of {what.value} on {target}")
        self.tables.record(actor, "revoke", target, "changed", f"{who} {what.value}")

    def users(self) -> list[dict[str, Any]]:
        """Every user: name, is_admin, and the groups it belongs to."""
        return [{"name": name, "is_admin": admin, "groups": ",".join(self.tables.groups_of(name))}
                for name, admin in self.store.list_users()]

    def user_privileges(self, name: str) -> list[dict[str, Any]]:
        name = self._existing_user(name)
        principals = [f"user:{name}"] + [f"group:{g}" for g in self.tables.groups_of(name)]
        rows = self.tables.grants_of(principals)
        admin = [{"principal": f"user:{name}", "privilege": "admin", "object": "*", "effect": "allow", "since": None}]
        return (admin if self.is_admin(name) else []) + rows

    # -- checks ---------------------------------------------------------------------------------------
    def allowed(self, user: str, privilege: Privilege, obj: str, *, owned_as: str | None = None) -> bool:
        """Whether ``user`` holds ``privilege`` on ``obj`` (``*``, a catalog or an FQN), by the rules above;
        ``owned_as``: the object whose owner holds it without a grant (``obj`` itself, or an engine's graph)."""
        if self.is_admin(user):
            return True
        principals = [f"user:{user}"] + [f"group:{g}" for g in self.tables.groups_of(user)]
        effects = self.tables.effects(principals, [privilege.value, Privilege.MANAGE.value], scopes_of(obj))
        if "deny" in effects:
            return False
        if owned_as is not None and self.tables.owner(owned_as) == user:
            return True
        return "allow" in effects

    def owner(self, obj: str) -> str | None:
        return self.tables.owner(obj)

    def set_owner(self, obj: str, owner: str) -> None:
        self.tables.set_owner(obj, owner)

    def refuse(self, user: str, action: str, obj: str, why: str) -> PermissionDenied:
        """Record a refused call in the audit log; the error to raise."""
        self.tables.record(user, action, obj, "denied", why)
        return PermissionDenied(f"{action}: user {user} {why}")

    def audit_log(self, limit: int = 1000) -> list[dict[str, Any]]:
        return self.tables.audit_rows(max(1, min(int(limit), 100_000)))
