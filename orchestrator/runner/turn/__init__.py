"""One seed's conversation: prompts per mode, the agent loop, one attempt on the wire, guards, traces."""
