"""Tidelog: a distributed, replicated, partitioned commit log (Apache Kafka's design) in Python."""

__version__ = "0.1.0"
