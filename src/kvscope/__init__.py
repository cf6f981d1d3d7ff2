"""kvscope: predict, explain and measure how LLM serving engines size GPU memory at startup."""

__version__ = "0.1.0"
