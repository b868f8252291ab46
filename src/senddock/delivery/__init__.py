"""Delivery: the queue, the senders, the outcome rules and the rescuer. Knows nothing of the web."""
