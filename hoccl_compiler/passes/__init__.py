"""The compiler passes, one module each, in the order :data:`hoccl_compiler.pipeline.PASSES` lists them."""
