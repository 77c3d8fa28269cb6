"""The Ray cluster and who holds the sweep: attach to a cluster or start a local head
(:mod:`.connect`), Ray's HTTP API (:mod:`.ray_http`), one launcher per sweep (:mod:`.lock`, its
lease), the owner record (:mod:`.owner`) and the store-reachability guard (:mod:`.guard`).
"""
