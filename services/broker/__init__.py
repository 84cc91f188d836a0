"""The broker: stores partition logs and serves produce and fetch (tidelog.broker)."""
