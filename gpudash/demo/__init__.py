"""The simulated incident host (``host``), its model units (``models``) and a simulated
fleet of them (``fleet``): the same interface as a real host, no GPU, no SSH."""
