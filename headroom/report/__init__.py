"""What people read: the tables behind every figure and text output, the rich renderers, the figures,
and traces annotated for Perfetto."""
