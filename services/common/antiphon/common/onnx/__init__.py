"""An ONNX graph run with torch operators (`torch_graph.py`, its operators in
`ops.py`): Piper's voice and Smart Turn on the GPU workers only; nothing here
is imported by a CPU worker or a front tier."""
