package server

// BodiesReading returns how many webhook bodies s is reading now.
func BodiesReading(s *Server) int64 { return s.bodiesReading.Load() }

// BodyMemoryInUse returns the bytes of BodyMemory reserved now.
func BodyMemoryInUse(s *Server) int64 { return s.bodyMemory.Load() }

// UsageSeeds are FuzzParseUsage's seed bodies.
var UsageSeeds = usageSeeds
