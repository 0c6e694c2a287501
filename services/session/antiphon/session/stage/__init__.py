"""A session's stage workers: the bindings, the links with their epoch fence,
the slots it holds, and the events the workers send."""
