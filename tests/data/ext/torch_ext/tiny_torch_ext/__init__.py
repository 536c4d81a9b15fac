"""tiny_torch_ext: import ``tiny_torch_ext.ops`` (torch first, then the compiled module)."""
