"""The REST gateway: produce and consume over HTTP (tidelog.gateway)."""
