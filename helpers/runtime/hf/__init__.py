"""Hugging Face models through Megatron-Bridge 0.6.2, worker side (the folder is checked before
start by helpers/job/hf_model.py and helpers/job/rules/hf.py):
  config.py         AutoBridge for the folder; its provider as the job's TransformerConfig
  registry.py       Bridge's mapping registry edited: the folder's spelling of an aliased tensor,
                    SequentialMLP twins of grouped-expert mappings
  weights.py        HF weights into the kit-built chunks (every parameter checked), export back
  parity.py         the import's logits against transformers, layout by layout
  te_standin.py     Bridge imported without Transformer Engine (Megatron-Core still sees none)
  bridge_import.py  only the job's architecture's bridge imported (not all ~270 Bridge modules)"""
