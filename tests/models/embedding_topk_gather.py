"""Retrieval-style scorer: nn.Embedding and EmbeddingBag(mean), normalize, similarity matmul, topk,
gather of the chosen rows, log_softmax; returns a dict."""
import torch
import torch.nn.functional as F
from torch import nn


class Retriever(nn.Module):
    def __init__(self, vocab=50, dim=16, items=20, k=4):
        super().__init__()
        self.k = k
        self.tok = nn.Embedding(vocab, dim, padding_idx=0)
        self.bag = nn.EmbeddingBag(vocab, dim, mode="mean")
        self.items = nn.Parameter(torch.randn(items, dim))
        self.scale = nn.Linear(dim, 1)

    def forward(self, ids):
        q = self.tok(ids).sum(1) + self.bag(ids)
        q = F.normalize(q, dim=-1)
        scores = q @ F.normalize(self.items, dim=-1).t()
        top_scores, top_idx = scores.topk(self.k, dim=-1)
        chosen = torch.gather(scores, 1, top_idx)
        emb = self.items[top_idx]  # advanced indexing -> index
        logits = self.scale(emb).squeeze(-1) + chosen
        return {"log_probs": F.log_softmax(logits, -1), "indices": top_idx, "top_scores": top_scores}


def make():
    torch.manual_seed(30)
    return Retriever().eval(), (torch.randint(0, 50, (3, 7)),)
