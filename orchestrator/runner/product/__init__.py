"""The product channel beside the model channel, and its guard ablation."""
