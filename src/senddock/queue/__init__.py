"""The queue layer: every statement that changes a job's, a broadcast's or a campaign's status.

Below `campaigns` (policy: what a draft is, who may pause) and `delivery` (sending), which both
call down into it and never into each other.
"""
