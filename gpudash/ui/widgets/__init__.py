"""The dashboard's widgets; each draws one part of the screen from domain objects."""
