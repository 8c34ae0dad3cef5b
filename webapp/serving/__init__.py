"""Serving: the runtime that owns the engines, the one generation service, limits, streams, health and
metrics. The apps (chat, api, console) present it; webapp.core keeps settings and cross-app plumbing."""
