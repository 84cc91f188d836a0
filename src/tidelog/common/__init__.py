"""Formats, configs and errors shared by every Tidelog component.

This package depends on nothing else of ours (an import-linter contract checks it).
"""
