"""A duplex worker as one stepper process (the model's lockstep batch) and
front-end processes (the gRPC streams), sharing rows through shared memory:
the parts both stages' workers use (stage0's `moshi`, stage1's `mimi`)."""
