"""Executing the delivery policy's decisions: the `Channel` protocol every channel implements
(`channel.py`), pure routing over what the channels report (`routing.py`), and the executor
over the ordered channels the composition root gives it (`executor.py`)."""
