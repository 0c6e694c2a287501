"""The `moshi` backend: a model-native duplex model of the Moshi architecture,
its sessions rows of one lockstep batch."""
