"""Integrations with training frameworks, one module each, so import the one you use:
``from mdiff.integrations.transformers import MdiffCallback`` (imports transformers), or
``from mdiff.integrations.peft import lora_updates_from_checkpoint`` (PEFT LoRA adapters as updates;
it reads the adapter's files and imports neither peft nor torch)."""
