"""DenseNet-style dense block + transition: repeated concat, eval BatchNorm, 1x1/3x3 convs, avg pool."""
import torch
from torch import nn


class DenseLayer(nn.Module):
    def __init__(self, cin, growth):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, 2 * growth, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(2 * growth)
        self.conv2 = nn.Conv2d(2 * growth, growth, 3, padding=1, bias=False)

    def forward(self, feats):
        x = torch.cat(feats, dim=1)
        x = self.conv1(torch.relu(self.bn1(x)))
        return self.conv2(torch.relu(self.bn2(x)))


class DenseBlock(nn.Module):
    def __init__(self, cin=6, growth=4, n=3):
        super().__init__()
        self.layers = nn.ModuleList(DenseLayer(cin + i * growth, growth) for i in range(n))
        cout = cin + n * growth
        self.transition = nn.Sequential(nn.BatchNorm2d(cout), nn.ReLU(), nn.Conv2d(cout, cout // 2, 1), nn.AvgPool2d(2))

    def forward(self, x):
        feats = [x]
        for layer in self.layers:
            feats.append(layer(feats))
        return self.transition(torch.cat(feats, 1))


def make():
    torch.manual_seed(6)
    model = DenseBlock()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.3)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval(), (torch.randn(2, 6, 8, 8),)
