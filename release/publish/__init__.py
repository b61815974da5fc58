"""Plan, guard and carry out uploads; index client, local index server, dependency channels."""
