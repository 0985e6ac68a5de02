"""A code corpus for the paper's pretraining study (Appendix "Pretraining at 1.3B Scale"), offline.

The paper pretrains on StarCoder; here the corpus is source already on the machine (the Python
standard library by default) or any folder, split into training and held-out files by file,
tokenized with a byte-level BPE trained on the training files and saved beside the runs.
"""

from probe.corpus.bpe import CodeTokenizer, train_bpe
from probe.corpus.files import SourceFile, find_sources, is_heldout, split_files
from probe.corpus.prepared import CODE_TASK, CorpusSpec, PreparedCorpus, corpus_folder_name, prepare_corpus

__all__ = [
    "CODE_TASK",
    "CodeTokenizer",
    "CorpusSpec",
    "PreparedCorpus",
    "SourceFile",
    "corpus_folder_name",
    "find_sources",
    "is_heldout",
    "prepare_corpus",
    "split_files",
    "train_bpe",
]
