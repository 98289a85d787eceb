"""The stream pool of a decoder with KV caches (:class:`~.pool.KvPool`): every stream's caches in
one arena (:mod:`.arena`), fed as a lone session is (:mod:`.model`, :mod:`.batch`), batched as the
model allows (:mod:`.probe`, :mod:`.groups`), run in place (:mod:`.run`, :mod:`.copied`), each
stream in a row or moved out under the memory budget (:mod:`.rows`, :mod:`.snapshot`)."""
