package store

// MaxConns is the size of the store's connection pool: Options.MaxConns,
// else the URL's pool_max_conns, else pgx's default (max(4, CPUs)).
func (s *Store) MaxConns() int { return int(s.pool.Config().MaxConns) }
