"""etcd, Tidelog's metadata store, as services use it.

- `connect`: an etcd client from the settings (TLS, login).
- `session`: a lease kept alive, and what happens when it is lost.
- `election`: etcd's election API (campaign, observe, resign) for the active controller.
- `active_controller`: which controller is active, read from the election.
- `registry`: registration keys created once under a lease.
- `watched_prefix`: a prefix's contents kept current by a watch.
- `compare`: transaction comparisons shared by the writers.
"""
