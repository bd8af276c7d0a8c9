"""The Textual dashboard: a thin layer over gpudash's domain (model, triage, engine).

Nothing outside this package imports it; the domain modules import no Textual.
"""
