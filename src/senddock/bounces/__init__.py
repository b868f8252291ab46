"""Bounces and complaints that come back after the relay's 250: read, classified, applied."""
