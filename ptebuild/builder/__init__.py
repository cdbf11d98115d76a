"""The builder: action keys, each target's life (:mod:`.target`), lowering in workers, publishing
outputs from the store (:mod:`.publish`); :mod:`.build` orders it all."""
