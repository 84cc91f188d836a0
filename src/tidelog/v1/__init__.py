"""Generated gRPC stubs (scripts/gen_proto.py); do not edit."""
