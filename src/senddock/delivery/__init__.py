"""Delivery: the senders, the outcome rules and the rescuer, over the queue layer below
(senddock.queue). Knows nothing of the web."""
