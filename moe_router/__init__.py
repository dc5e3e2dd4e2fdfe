"""Routed LoRA mixture, router training, task router and OpenAI-compatible server (DESIGN.md,
moe_router). The folder is part of the layout the foundation sets up; its modules come with the
issue that builds the routing stage."""
