"""Analysis tools: temporal Jacobians and their spectra (jacobian), Fisher memory curves
(fisher) and Schur views of recurrent matrices (schur)."""

from .fisher import (
    delay_line_fmc,
    feedforward_matrix,
    fisher_memory_curve,
    noise_covariance,
    noise_factor,
)
from .schur import SchurView, cell_schur_views, matrix_schur_view, real_schur, schur_view

__all__ = [
    "fisher_memory_curve",
    "noise_covariance",
    "noise_factor",
    "delay_line_fmc",
    "feedforward_matrix",
    "SchurView",
    "real_schur",
    "schur_view",
    "matrix_schur_view",
    "cell_schur_views",
]
