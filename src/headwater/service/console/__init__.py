"""The web console: pages under ``/ui`` on the master (and on ``headwater ui --data-dir DIR``).

- ``/ui/login``: the only page that answers without a session. A login (the API's users and passwords, the same
  limits) sets the session cookie (``HttpOnly``, ``SameSite=Strict``); the console's pages, assets and answers
  need it (the master's guard, :mod:`headwater.service.doors`), and every call but a page's ``GET`` needs the
  session's CSRF token too.
- Pages: graphs (status, owner, age, throughput, lag, their lifecycle buttons), one graph (its logical and
  physical DAG laid out by dagre, numbers refreshed by server-sent events, its state-machine events), its
  checkpoints (a timeline of micro-batches and their stream tasks), tables (definition, rows, versions, a
  sample, lineage), a SQL console with paged results, workers (with their Spark UI), users and privileges.
- What a page shows comes from the API's operations called as the signed-in user (:mod:`headwater.service.console.views`);
  a button calls the API itself (``POST /v1/<operation>``), so the console can do nothing the API would refuse.
"""

from headwater.service.console.app import mount_console

__all__ = ["mount_console"]
