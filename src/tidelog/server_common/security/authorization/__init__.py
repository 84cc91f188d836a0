"""What a call may do, on a listener.

- `access_control`: the caller, the service roles and the ACL authorizer fed by etcd.
- `acl_store`: ACL bindings in etcd, one key per binding.
"""
