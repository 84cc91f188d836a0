"""etcd, Tidelog's metadata store: the server process (for local runs), sessions and elections."""
