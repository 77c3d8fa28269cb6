"""The figures: Figure 1 (proximal regions) and Figure 2 (training dynamics) in
:mod:`.paper_figures`; the axis-response figure in :mod:`.axis_figure`.
"""
