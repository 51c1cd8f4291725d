"""Where access control lives in the metadata database: groups, grants, owners and the audit log.

Users and their tokens stay in :mod:`headwater.storage.metadata`; these tables sit beside them in the same
database and are created with it (:class:`AccessStore` over the store's engine).
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa

from headwater.storage.metadata import newest_rows, read_value, read_values, write_row

_meta = sa.MetaData()

groups = sa.Table("access_groups", _meta, sa.Column("name", sa.String, primary_key=True))

members = sa.Table(
    "access_group_members", _meta,
    sa.Column("group_name", sa.String, primary_key=True),
    sa.Column("user_name", sa.String, primary_key=True),
)

grants = sa.Table(
    "access_grants", _meta,
    sa.Column("principal", sa.String, primary_key=True),  # "user:<name>" or "group:<name>"
    sa.Column("privilege", sa.String, primary_key=True),
    sa.Column("object", sa.String, primary_key=True),  # "*", a catalog, or a graph/table/engine FQN
    sa.Column("effect", sa.String, nullable=False),  # "allow" or "deny"
    sa.Column("since", sa.Float, nullable=False),
)

owners = sa.Table(
    "access_owners", _meta,
    sa.Column("object", sa.String, primary_key=True),  # a graph or table FQN
    sa.Column("owner", sa.String, nullable=False),
)

audit = sa.Table(
    "access_audit", _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("time", sa.Float, nullable=False),
    sa.Column("user_name", sa.String, nullable=False),
    sa.Column("action", sa.String, nullable=False),  # the operation, or the privilege change
    sa.Column("object", sa.String, nullable=False),
    sa.Column("outcome", sa.String, nullable=False),  # "denied" or "changed"
    sa.Column("detail", sa.Text, nullable=False),
)


class AccessStore:
    """Reads and writes of the access tables, each one transaction."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        _meta.create_all(engine)

    # -- groups ---------------------------------------------------------------------------------------
    def add_group(self, name: str) -> bool:
        with self.engine.begin() as c:
            if c.scalar(sa.select(groups.c.name).where(groups.c.name == name)) is not None:
                return False
            c.execute(sa.insert(groups).values(name=name))
            return True

    def drop_group(self, name: str) -> bool:
        with self.engine.begin() as c:
            gone = c.execute(sa.delete(groups).where(groups.c.name == name)).rowcount
            c.execute(sa.delete(members).where(members.c.group_name == name))
            c.execute(sa.delete(grants).where(grants.c.principal == f"group:{name}"))
            return bool(gone)

    def has_group(self, name: str) -> bool:
        return read_value(self.engine, groups.c.name, groups.c.name == name) is not None

    def set_member(self, group: str, user: str, member: bool) -> None:
        with self.engine.begin() as c:
            c.execute(sa.delete(members).where(members.c.group_name == group, members.c.user_name == user))
            if member:
                c.execute(sa.insert(members).values(group_name=group, user_name=user))

    def groups_of(self, user: str) -> list[str]:
        return read_values(self.engine, members.c.group_name, members.c.user_name == user)

    def forget_user(self, user: str) -> None:
        with self.engine.begin() as c:
            c.execute(sa.delete(members).where(members.c.user_name == user))
            c.execute(sa.delete(grants).where(grants.c.principal == f"user:{user}"))

    # -- grants ---------------------------------------------------------------------------------------
    def set_grant(self, principal: str, privilege: str, obj: str, effect: str, narrower: str | None) -> None:
        """Grant or deny at ``obj``; the same privilege's entries of the principal under it (objects starting
        with ``narrower``, every one for ``*``) go: a broad grant after narrow ones overrides them."""
        with self.engine.begin() as c:
            mine = sa.and_(grants.c.principal == principal, grants.c.privilege == privilege)
            if obj == "*":
                c.execute(sa.delete(grants).where(mine))
            else:
                under = grants.c.object.startswith(narrower, autoescape=True) if narrower else sa.false()
                c.execute(sa.delete(grants).where(mine, sa.or_(grants.c.object == obj, under)))
            c.execute(sa.insert(grants).values(principal=principal, privilege=privilege, object=obj, effect=effect,
                                               since=time.time()))

    def revoke(self, principal: str, privilege: str, obj: str) -> bool:
        with self.engine.begin() as c:
            return bool(c.execute(sa.delete(grants).where(
                grants.c.principal == principal, grants.c.privilege == privilege, grants.c.object == obj)).rowcount)

    def effects(self, principals: list[str], privileges: list[str], objects: list[str]) -> set[str]:
        """The effects ("allow", "deny") of the entries that apply."""
        with self.engine.connect() as c:
            return set(c.scalars(sa.select(grants.c.effect).where(
                grants.c.principal.in_(principals), grants.c.privilege.in_(privileges), grants.c.object.in_(objects))))

    def grants_of(self, principals: list[str]) -> list[dict[str, Any]]:
        with self.engine.connect() as c:
            rows = c.execute(sa.select(grants).where(grants.c.principal.in_(principals))
                             .order_by(grants.c.principal, grants.c.privilege, grants.c.object))
            return [dict(r._mapping) for r in rows]

    # -- owners ---------------------------------------------------------------------------------------
    def set_owner(self, obj: str, owner: str) -> None:
        write_row(self.engine, owners, object=obj, owner=owner)

    def owner(self, obj: str) -> str | None:
        owner = read_value(self.engine, owners.c.owner, owners.c.object == obj)
        return None if owner is None else str(owner)

    # -- audit ----------------------------------------------------------------------------------------
    def record(self, user: str, action: str, obj: str, outcome: str, detail: str) -> None:
        with self.engine.begin() as c:
            c.execute(sa.insert(audit).values(time=time.time(), user_name=user, action=action, object=obj,
                                              outcome=outcome, detail=detail))

    def audit_rows(self, limit: int) -> list[dict[str, Any]]:
        return newest_rows(self.engine, audit, limit)
