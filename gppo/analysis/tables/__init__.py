"""Table 1 and the other tables: built from the tidy scores (:mod:`.table1`, its types
:mod:`.table1_model`), rendered (:mod:`.render`), aggregated over benchmarks (:mod:`.aggregate`),
per axis point (:mod:`.axis_tables`), with adaptive seeds' stops (:mod:`.adaptive_stops`), the
cost column (:mod:`.cost_column`) and the exploration study's contrasts
(:mod:`.exploration_contrasts`).
"""
