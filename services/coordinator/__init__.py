"""The group coordinator: consumer group membership and offset commits (tidelog.coordinator)."""
