"""Service mode: the master as a long-lived process behind an HTTP API, sessions that connect to it.

``headwater master --data-dir D`` serves :func:`headwater.service.server.create_app`; ``hw.connect(url,
user=..., password=...)`` returns the same :class:`~headwater.api.session.Session` as the embedded mode,
talking to the master through :class:`headwater.service.client.RemoteMaster`. Graphs submitted this way
belong to the master's process and keep running after the client exits.
"""
