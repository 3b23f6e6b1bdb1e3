"""One module per method family; each registers its handlers on the router."""
