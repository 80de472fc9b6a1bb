"""What the next forward pass contains: vLLM V1, SGLang, no chunking."""
