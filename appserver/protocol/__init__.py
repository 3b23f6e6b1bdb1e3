"""Wire protocol: pydantic models, error codes and the one method table."""
