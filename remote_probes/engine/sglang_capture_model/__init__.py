"""The target's model class, as SGLang's registry resolves it, made to capture the EAGLE-3 aux hidden states a
capture server returns (imported by the SGLang server itself through ``SGLANG_EXTERNAL_MODEL_PACKAGE``, never by a
probe; see sglang_states.py for the client and the flags).

A package, not a module, because SGLang wants one: ``ModelRegistry.register(external_pkg, overwrite=True)``
(srt/models/registry.py:133-134 in 0.5.15.post1) runs ``import_model_classes``, which imports the package and walks
``pkgutil.iter_modules(package.__path__)`` (:97-98), registering each module's ``EntryClass`` under the class's
``__name__`` (:111-124). ``capturing_target`` is that one module; this file is empty so that importing the package
costs nothing.
"""

from __future__ import annotations
