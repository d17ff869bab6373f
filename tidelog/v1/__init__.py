"""Generated gRPC modules of the tidelog.v1 API (regenerate with scripts/gen-proto.sh)."""
