"""The controller: elects itself through etcd and manages partition leadership (tidelog.controller)."""
